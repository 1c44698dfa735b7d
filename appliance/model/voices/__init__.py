"""Find Piper voices, cut each into encoder and decoder, cache and verify the cut.

A Piper VITS voice is one ONNX graph.  Streaming needs it in two halves: the
encoder (text encoder, duration predictor, flow → latent ``z``) and the
decoder (HiFi-GAN, ``z`` → waveform).  The cut tensors are found by pattern —
the input of the Conv whose weight is ``dec.conv_pre.weight`` is ``z``, the
single ``Ceil`` gives frames per phoneme id, and for multi-speaker voices the
input of ``dec.cond`` is the speaker conditioning ``g`` — never by the
exporter's generated names, which differ between voices.

The encoder is cut once more, before the flow: the *prior* (text encoder,
duration predictor, sampling → ``z_p``) and the *flow* (``z_p`` → ``z``).  The
flow is a stack of convolutions with a small receptive field, so it too can
run on a window of frames with context; the first chunk of a request then
waits only for the flow over its own frames instead of the whole clause's
(half the encoder's time on a short command).  ``z_p`` is the sum the graph
draws its noise into (an ``Add`` fed by ``RandomNormalLike`` that the
durations do not depend on); the flow's one other dynamic input is the frame
mask.

The parts are written once to the cache, keyed by the model's sha256, and
checked against the fused model with zero noise.  On the way each part may be
rewritten for ONNX Runtime's faster kernels (layer norms fused, convolutions
run 2-D: :mod:`appliance.model.layernorm`, :mod:`appliance.model.conv2d`), and the decoder
written a second time in 2-D for the windows decoded ahead; a rewrite is kept
only when its outputs stay within the same tolerance.  A voice whose cut does not
reproduce the fused output runs whole-sentence (``split_ok = False``); one whose
flow split does not runs its encoder whole (``flow_split = None``).

The stages are modules of their own: :mod:`.discover` (which voices there are),
:mod:`.cut` (the parts, by pattern, and their rewrites), :mod:`.verify` (each part
checked against the fused model, the least context that passes), :mod:`.load` (the
pipeline, and the cache).  This package names what the rest of the daemon uses.
"""

from appliance.model.voices.cut import (
    CUT_TOLERANCE,
    VERIFY_SENTENCE,
    cut_flow,
    cut_lean_decoder,
    cut_margin_decoder,
    cut_model,
    find_cut,
    find_flow,
    sha256_of,
)
from appliance.model.voices.discover import VoiceError, bundled_voice_path, discover
from appliance.model.voices.load import load_voice
from appliance.model.voices.verify import smallest_context, verify_cut, verify_flow
from appliance.voicetypes import CutNames, FlowSplit, Voice, VoiceInfo

__all__ = [
    "CUT_TOLERANCE",
    "VERIFY_SENTENCE",
    "CutNames",
    "FlowSplit",
    "Voice",
    "VoiceError",
    "VoiceInfo",
    "bundled_voice_path",
    "cut_flow",
    "cut_lean_decoder",
    "cut_margin_decoder",
    "cut_model",
    "discover",
    "find_cut",
    "find_flow",
    "load_voice",
    "sha256_of",
    "smallest_context",
    "verify_cut",
    "verify_flow",
]
