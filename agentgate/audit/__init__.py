"""Evidence: the Merkle audit log's entries, hashing, signed checkpoints, proofs and spans."""
