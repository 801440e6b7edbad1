"""edgegw's benchmarks: `python -m bench --help`."""
