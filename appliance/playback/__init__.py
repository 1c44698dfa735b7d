"""Speaker output: one persistent PortAudio stream with speech-dispatcher priorities."""

from appliance.playback.player import NoAudioDevice, Player, StreamInfo
from appliance.playback.queue import Priority, SpeechQueue
from appliance.playback.utterance import EndInfo, Utterance

__all__ = [
    "EndInfo",
    "NoAudioDevice",
    "Player",
    "Priority",
    "SpeechQueue",
    "StreamInfo",
    "Utterance",
]
