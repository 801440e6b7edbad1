# make binary: the one-file executable dist/edgegw (see scripts/build-binary for what it needs
# and what it does); make smoke-binary: build it, then test it as CI does.
.PHONY: binary smoke-binary

binary:
	bash scripts/build-binary

smoke-binary: binary
	bash scripts/smoke-binary
