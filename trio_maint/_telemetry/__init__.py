"""The Trio shell of the optional exporters (:mod:`trio_maint.otel`,
:mod:`trio_maint.prometheus`): :class:`~trio_maint._telemetry.shell.ClientTelemetry` hooks
into a client and hands what :mod:`trio_maint._sansio.telemetry` decides to the exporters'
sinks. Imports no optional package."""
