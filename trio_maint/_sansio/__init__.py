"""The sans-IO layer: values in, values out, no waiting.

RESP encoding and parsing, the error hierarchy, the typed command methods and their reply
callbacks (the one INFO parser), client options and the maintenance configuration,
endpoints (the one ``host:port`` parser and formatter), maintenance notifications,
relaxed timeouts, circuit breakers (time is passed in) and cluster slots.

May import: the standard library, ``attrs`` and ``hiredis``; never ``trio`` and no other
layer of trio_maint (tests/test_layout.py checks both).
"""
