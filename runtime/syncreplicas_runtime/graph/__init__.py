"""The training graph of one sync epoch: optimizer, tokens, packed variables, the update
counter."""
