"""The SQLAlchemy store: SQLite (aiosqlite) by default, PostgreSQL (asyncpg) for replicas."""
