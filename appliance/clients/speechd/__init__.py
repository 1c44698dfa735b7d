"""speech-dispatcher output module ``sd_ttsd``: the module-protocol side of a ttsd client.

See :mod:`appliance.clients.speechd.module` (the module),
:mod:`appliance.clients.speechd.wire` (the pipe protocol) and docs/speechd.md.
"""
