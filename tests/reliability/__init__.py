"""What survives faults: SIGKILLs, damaged stores, failed commits, misbehaving servers."""
