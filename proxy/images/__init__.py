"""Documents' drawn pages as images for a vision model: which go, at which detail, in which room."""
