"""Model routing (ROUTING_ENABLED, ROUTING_CONFIG_PATH): aliases spread over deployments.

config.py reads and validates the routing file at start (a record, imported by the
settings); breaker.py is the circuit breaker's state machine, pure, on a clock passed in;
router.py holds the per-process state (cursors, breakers, latencies, Retry-After) and runs
one request's attempts, failing over before the first byte reaches the client.
"""
