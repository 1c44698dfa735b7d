"""Text: cleaning, SSML, normalisation, sentence split, lexicon, phonemes."""
