"""Several tables' inserts and upserts as ONE PostgreSQL statement: one round trip.

A write transaction on PostgreSQL costs a round trip per statement plus BEGIN and COMMIT; a
run's creation (a session, a run, its first event, message and snapshot) took seven. Here
each table's rows are a data-modifying CTE of one statement,

    WITH w0 AS (INSERT INTO sessions (…) SELECT … FROM unnest($1::VARCHAR[], …) AS …),
         w1 AS (INSERT INTO runs (…) SELECT … FROM unnest(…) AS …), …,
         w4 AS (INSERT INTO snapshots (…) SELECT … ON CONFLICT (run_id) DO UPDATE SET …)
    SELECT pg_notify($n, $p), …          -- or SELECT 1

which, run on an AUTOCOMMIT connection (`Writer.execute_once`), is its own transaction: all
of its rows land or none (a duplicate key in any CTE fails the whole), and its NOTIFYs are
delivered only once it commits. PostgreSQL runs every CTE of a statement to completion
whether the main query reads it or not, and checks foreign keys at the end of the statement,
so a child row may be in a later CTE than its parent (runs after sessions).

Each column's values are one array parameter, unnested into rows, rather than a VALUES list
of one parameter per value: the statement's text then depends only on its tables and
columns, never on how many rows it carries, so asyncpg prepares it once per connection and
a batch of any size reuses it (a connection's first use costs a Parse/Describe round trip,
and asyncpg's look-up of the array types, a few more); SQLAlchemy caches its compilation (a
multi-row VALUES insert is never cached: compiling a creation's took ~6 ms each time); and a
batch is never near PostgreSQL's 32,767 parameters. The
arrays are cast to the columns' types without their lengths: casting to VARCHAR(36)[] would
silently cut longer strings, while the INSERT's own assignment refuses them as before.

What one statement cannot do (PostgreSQL: "the sub-statements in WITH are executed
concurrently … with the same snapshot"): a CTE does not see another's rows, so the same key
must not be written twice in one statement (two inserts of it fail as a duplicate; two
upserts of it fail with "cannot affect row a second time"), and nothing may read what an
earlier CTE wrote. SQLite has no data-modifying CTEs: these statements are PostgreSQL's only.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

Row = Mapping[str, Any]
# Statements kept built: one per combination of tables and columns (a creation is one).
SHAPES_CACHED = 64


class OneStatement(NamedTuple):
    """A statement and its parameters: `connection.execute(statement, params)`."""

    statement: sa.Select[Any]
    params: dict[str, Any]


# A group's shape: its table, the columns its rows name (in the table's order), and for an
# upsert the conflict key.
_Shape = tuple[sa.Table, tuple[str, ...], str | None]


def one_statement(
    inserts: Sequence[tuple[sa.Table, Sequence[Row]]],
    upserts: Sequence[tuple[sa.Table, str, Sequence[Row]]] = (),
    notify: Sequence[tuple[str, str]] = (),
) -> OneStatement:
    """One statement inserting `inserts` (table, rows), then upserting `upserts` (table,
    conflict key, rows: every other column they name is updated), and sending each
    (channel, payload) of `notify` with pg_notify, delivered only if the statement commits.
    Groups without rows are left out. All rows of a group name the same columns; a column
    they leave out gets its default (an upsert leaves it as is)."""
    groups: list[tuple[sa.Table, str | None, Sequence[Row]]]
    groups = [(table, None, rows) for table, rows in inserts]
    groups += [(table, key, rows) for table, key, rows in upserts]
    shapes: list[_Shape] = []
    params: dict[str, Any] = {}
    for table, key, rows in groups:
        if not rows:
            continue
        columns = _columns(table, rows)
        if key is not None and key not in columns:
            raise ValueError(f"rows of {table.name} do not name their key {key}")
        index = len(shapes)
        shapes.append((table, columns, key))
        try:
            for column in columns:
                params[_name(index, column)] = [row[column] for row in rows]
        except KeyError as exc:
            raise ValueError(f"rows of {table.name} name different columns") from exc
        if any(len(row) != len(columns) for row in rows):
            raise ValueError(f"rows of {table.name} name different columns")
    for n, (channel, payload) in enumerate(notify):
        params[f"notify{n}_channel"], params[f"notify{n}_payload"] = channel, payload
    return OneStatement(_build(tuple(shapes), len(notify)), params)


def _columns(table: sa.Table, rows: Sequence[Row]) -> tuple[str, ...]:
    """The columns the first row names, in the table's order (one text per shape)."""
    named = rows[0].keys()
    columns = tuple(c.name for c in table.columns if c.name in named)
    if len(columns) != len(named):
        unknown = sorted(set(named) - set(columns))
        raise ValueError(f"{table.name} has no columns {unknown}")
    return columns


def _name(group: int, column: str) -> str:
    return f"w{group}_{column}"


@functools.lru_cache(maxsize=SHAPES_CACHED)
def _build(shapes: tuple[_Shape, ...], notifies: int) -> sa.Select[Any]:
    """The statement of a shape, with `notifies` pg_notify calls in its main query (which
    PostgreSQL evaluates once: it has no FROM)."""
    calls = [
        sa.func.pg_notify(
            sa.bindparam(f"notify{n}_channel", type_=sa.Text()),
            sa.bindparam(f"notify{n}_payload", type_=sa.Text()),
        )
        for n in range(notifies)
    ]
    main = sa.select(*calls) if calls else sa.select(sa.literal_column("1"))
    for index, (table, columns, key) in enumerate(shapes):
        arrays = [
            sa.bindparam(_name(index, c), type_=postgresql.ARRAY(_unbounded(table.c[c].type)))
            for c in columns
        ]
        rows = sa.func.unnest(*arrays).table_valued(*columns).render_derived()
        insert = postgresql.insert(table).from_select(
            list(columns), sa.select(*(rows.c[c] for c in columns))
        )
        if key is not None:
            changed = {c: insert.excluded[c] for c in columns if c != key}
            insert = (
                insert.on_conflict_do_update(index_elements=[key], set_=changed)
                if changed
                else insert.on_conflict_do_nothing(index_elements=[key])
            )
        main = main.add_cte(insert.cte(f"w{index}"))
    return main


def _unbounded(column_type: sa.types.TypeEngine[Any]) -> sa.types.TypeEngine[Any]:
    """The type an array of the column's values is cast to: a string type without its
    length (an explicit cast to VARCHAR(n) would cut longer values instead of refusing)."""
    if isinstance(column_type, sa.String) and column_type.length is not None:
        return sa.String()
    return column_type
