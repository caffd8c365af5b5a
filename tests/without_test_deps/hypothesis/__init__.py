"""Keeps the test-only ``hypothesis`` package out of gateway subprocesses.

``tests.support.GatewayProcess`` puts this directory first on the gateway's ``PYTHONPATH``, so
the gateway runs as it does when installed without the test extras: the Kafka schema library
(kio) registers Hypothesis strategies for its types whenever ``hypothesis`` imports, which costs
about a second at every gateway start, and a gateway never uses them.
"""

raise ImportError("hypothesis is a test dependency: gateway subprocesses run without it")
