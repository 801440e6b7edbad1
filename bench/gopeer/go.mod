module edgegw-bench-gopeer

go 1.26
