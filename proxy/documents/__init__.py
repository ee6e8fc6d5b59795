"""Documents in, pages of text out. Imports nothing: a parse worker loads no pool or cache code."""
