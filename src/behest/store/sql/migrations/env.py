"""Alembic environment: migrations run on the connection behest hands over at start-up."""

from alembic import context

from behest.store.sql.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
