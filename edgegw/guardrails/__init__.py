"""Guardrails (GUARDRAILS_*): Rego policies evaluated in the Rust core, the built-in
detectors, the external checker, and the phases a request passes (edgegw.guardrails.check)."""
