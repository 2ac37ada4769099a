"""Persistence behind one protocol; `store.sql` implements it for SQLite and PostgreSQL."""
