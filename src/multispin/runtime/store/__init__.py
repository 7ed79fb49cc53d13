"""What survives a crash: the server's journal (journal.py), its hash-chain head (head.py), the
chain check (check.py) and the repair of a damaged journal (repair.py). A leaf ring."""
