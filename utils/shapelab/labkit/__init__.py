"""The lab kit: the bench (widgets), lab checks, the claims ledger, and labgen."""
