"""Model providers behind one protocol over normalised messages and stream deltas."""
