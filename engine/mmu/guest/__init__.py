"""The guest side: the guest's own page tables and processes, and what every running
guest (a session on one of the MMUs) shares: its workload, clock, counts and events."""
