"""`python -m cpbcg` (also what `torchrun -m cpbcg capture ...` runs on each rank)."""

from cpbcg.cli import main

if __name__ == "__main__":
    main()
