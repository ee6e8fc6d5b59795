"""Fake edges for tests: real servers on 127.0.0.1:0, recording what they receive."""
