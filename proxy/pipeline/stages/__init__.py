"""The stages of the chat request pipeline, one module each."""
