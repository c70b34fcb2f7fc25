"""The protocol's endpoints: the sharing service (plan, then stream), names and grants, signed
tokens, the one translation from Delta to the protocol's lines, and partition slices."""
