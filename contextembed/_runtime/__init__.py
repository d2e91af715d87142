"""How work runs on this machine and what it leaves on disk: devices and precisions, backends and
quantisation, threads, forks and signals, the terminal, files and locks, provenance records and the
feature store. Private: the public layers import from here; nothing here imports them.
"""
