"""Sphinx configuration of trio_maint's documentation (``nox -s docs``)."""

from __future__ import annotations

import trio_maint

project = "trio_maint"
author = "trio_maint contributors"
copyright = "trio_maint contributors"
version = release = trio_maint.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxcontrib_trio",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}

# No network at build time, so no intersphinx: references to the standard library, Trio
# and attrs are left as plain text instead of links.
nitpick_ignore_regex = [
    (r"py:.*", r"(trio|attrs|ssl|typing|collections|types|logging|socket|enum|re)\..*"),
    (r"py:.*", r"(Any|Self|Final|TypeAlias|Callable|Awaitable|Sequence|Mapping|Iterator)"),
    (r"py:.*", r"(AsyncIterator|AsyncGenerator|Generator|Iterable|TracebackType|Protocol)"),
    (r"py:.*", r"(SSLContext|Counter|TextIO|BaseExceptionGroup|Literal|TypeVar|ParamSpec)"),
    (r"py:.*", r"(ConnT|T|_T|CommandArg|KeyT|Callback|PushHandler|Address|Target)"),
    (r"py:.*", r"(trio_maint\.(.*\.)?_.*|_.*)"),
    # Internal helpers and constants named in docstrings but not part of the API pages.
    (r"py:.*", r"(detect_endpoint_type|split_host_port|READONLY_MOVING_GRACE)"),
    (r"py:.*", r"(MAINTENANCE_PUSH_NAMES|unix_path|StringStyle|NullStyle)"),
    (r"py:.*", r"completed_handoffs /"),
    (r"py:.*", r"(Dialer|open|TimeoutPolicy|HandshakeHook|describe_shape|feed|at_boundary)"),
    (r"py:.*", r"(Action|trio_maint\.Connection|Connection|StreamIO|Unset|ReplyWaiter)"),
    (r"py:.*", r"(EventHub|Subscriber|ConnectionSelector)"),
    # The mixins giving the clients and pipelines register_script (_client/script.py).
    (r"py:.*", r"(Scripting|PipelineScripting)"),
    # What StreamConsumer needs of a client (Redis or RedisCluster), and their mixin.
    (r"py:.*", r"(CommandRunner|StreamConsumers)"),
    # The optional exporters' parameters (trio_maint.otel, trio_maint.prometheus).
    (r"py:.*", r"(opentelemetry|prometheus_client)\..*"),
    (r"py:.*", r"(MeterProvider|TracerProvider|CollectorRegistry|Client)"),
    (r"py:.*", r"(ClientTelemetry|Sink|BreakerListener)"),
]

html_theme = "alabaster"
html_title = f"trio_maint {release}"
