"""speech-dispatcher output module ``sd_ttsd``: the module-protocol side of a ttsd client.

See :mod:`appliance.clients.speechd.module` (the module: its commands),
:mod:`~appliance.clients.speechd.speech` (one message spoken),
:mod:`~appliance.clients.speechd.link` (the connection to ttsd),
:mod:`~appliance.clients.speechd.options` (voice and request options),
:mod:`~appliance.clients.speechd.pipes` (stdin/stdout), :mod:`appliance.clients.speechd.wire`
(the pipe protocol) and docs/speechd.md.
"""
