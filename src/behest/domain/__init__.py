"""Plain domain types: no grpc, no SQLAlchemy."""
