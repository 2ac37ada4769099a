"""Agents in SQL (domain/agents.py): a row per agent, per version, per alias. A version's
definition is one JSON document, written with the runs table's own column codecs
(run_rows.py), and its SHA-256 tells an unchanged definition without comparing documents."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from behest.domain.agents import Agent, AgentDefinition, AgentVersion
from behest.errors import AlreadyExists, FailedPrecondition, NotFound, quote
from behest.store.agent_store import PutMode
from behest.store.sql import run_rows
from behest.store.sql.agent_tables import agent_aliases, agent_versions, agents
from behest.store.sql.engine import Engines
from behest.store.sql.rows import utc

_a, _v, _al = agents.c, agent_versions.c, agent_aliases.c


def definition_json(definition: AgentDefinition) -> str:
    """The stored form of a definition: compact, keys sorted (equal definitions, equal text)."""
    document: dict[str, Any] = {
        "description": definition.description,
        "instructions": definition.instructions,
        "provider": definition.provider,
        "model": definition.model,
        "tools": list(definition.tools),
        "tool_choice": str(definition.tool_choice),
        "max_iterations": definition.max_iterations,
        "metadata": definition.metadata,
        "allow_sub_agents": definition.allow_sub_agents,
        "sub_agents": list(definition.sub_agents),
        "handoffs": list(definition.handoffs),
        **run_rows.waits_to_columns(definition.waits),
        **run_rows.budget_to_columns(definition.budget),
        **run_rows.response_format_to_columns(definition.response_format),
        **run_rows.reasoning_to_columns(definition.reasoning),
    }
    document.pop("output")
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


def definition_of(text: str) -> AgentDefinition:
    row = SimpleNamespace(**json.loads(text))
    return AgentDefinition(
        description=row.description,
        instructions=row.instructions,
        provider=row.provider,
        model=row.model,
        tools=tuple(row.tools),
        tool_choice=row.tool_choice,
        waits=run_rows.waits_from_row(row),
        budget=run_rows.budget_from_row(row),
        response_format=run_rows.response_format_from_row(row),
        reasoning=run_rows.reasoning_from_row(row),
        max_iterations=row.max_iterations,
        metadata=row.metadata,
        allow_sub_agents=row.allow_sub_agents,
        sub_agents=tuple(row.sub_agents),
        handoffs=tuple(row.handoffs),
    )


def _version_of(row: Any) -> AgentVersion:
    return AgentVersion(
        name=row.name,
        version=row.version,
        definition=definition_of(row.definition),
        created_at=utc(row.created_at),
        created_by=row.created_by,
    )


def _agent_of(row: Any, aliases: dict[str, int]) -> Agent:
    return Agent(
        name=row.name,
        tenant=row.tenant,
        latest_version=row.latest_version,
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
        aliases=aliases,
        archived=bool(row.archived),
        description=row.description,
    )


def _one(conn: Connection, tenant: str, name: str, *, lock: bool = False) -> Agent | None:
    query = sa.select(agents).where(_a.tenant == tenant, _a.name == name)
    row = conn.execute(query.with_for_update() if lock else query).first()
    if row is None:
        return None
    aliases = sa.select(_al.alias, _al.version).where(_al.tenant == tenant, _al.name == name)
    return _agent_of(row, {a: v for a, v in conn.execute(aliases)})


def put_version(
    conn: Connection,
    tenant: str,
    name: str,
    definition: AgentDefinition,
    *,
    by: str,
    now: datetime,
    mode: PutMode,
) -> tuple[Agent, AgentVersion, bool]:
    """The agent's next version (its row locked first), unless the latest holds `definition`."""
    text = definition_json(definition)
    digest = hashlib.sha256(text.encode()).hexdigest()
    agent = _one(conn, tenant, name, lock=True)
    if agent is not None and mode == "create":
        raise AlreadyExists(f"agent {quote(name)} exists; UpdateAgent makes a new version")
    if agent is None and mode == "update":
        raise NotFound(f"no agent {quote(name)}")
    if agent is not None and agent.archived:
        raise FailedPrecondition(f"agent {quote(name)} is archived")
    if agent is not None:
        latest = conn.execute(
            sa.select(agent_versions).where(
                _v.tenant == tenant, _v.name == name, _v.version == agent.latest_version
            )
        ).one()
        if latest.digest == digest:
            return agent, _version_of(latest), False
    number = agent.latest_version + 1 if agent is not None else 1
    values = {"latest_version": number, "description": definition.description, "updated_at": now}
    try:
        if agent is None:
            conn.execute(
                sa.insert(agents).values(
                    tenant=tenant, name=name, archived=False, created_at=now, **values
                )
            )
        else:
            conn.execute(
                sa.update(agents).where(_a.tenant == tenant, _a.name == name).values(**values)
            )
        conn.execute(
            sa.insert(agent_versions).values(
                tenant=tenant,
                name=name,
                version=number,
                definition=text,
                digest=digest,
                created_at=now,
                created_by=by,
            )
        )
    except IntegrityError:  # a concurrent creation of the same agent won
        raise AlreadyExists(f"agent {quote(name)} was created concurrently; try again") from None
    stored = _one(conn, tenant, name)
    assert stored is not None
    version = AgentVersion(
        name=name, version=number, definition=definition, created_at=now, created_by=by
    )
    return stored, version, True


def set_alias(
    conn: Connection, tenant: str, name: str, alias: str, version: int, *, now: datetime
) -> Agent | None:
    if _one(conn, tenant, name, lock=True) is None:
        return None
    where = (_al.tenant == tenant, _al.name == name, _al.alias == alias)
    conn.execute(sa.delete(agent_aliases).where(*where))
    if version:
        conn.execute(
            sa.insert(agent_aliases).values(tenant=tenant, name=name, alias=alias, version=version)
        )
    conn.execute(
        sa.update(agents).where(_a.tenant == tenant, _a.name == name).values(updated_at=now)
    )
    return _one(conn, tenant, name)


def archive(conn: Connection, tenant: str, name: str, *, now: datetime) -> Agent | None:
    found = conn.execute(
        sa.update(agents)
        .where(_a.tenant == tenant, _a.name == name)
        .values(archived=True, updated_at=now)
    )
    return _one(conn, tenant, name) if found.rowcount else None


class AgentsInSql:
    """The Store's agent methods, for SqlStore (which has `engines`)."""

    @property
    def engines(self) -> Engines:
        raise NotImplementedError

    async def put_agent_version(
        self,
        tenant: str,
        name: str,
        definition: AgentDefinition,
        *,
        by: str,
        now: datetime,
        mode: PutMode,
    ) -> tuple[Agent, AgentVersion, bool]:
        return await self.engines.writer.write(
            put_version, tenant, name, definition, by=by, now=now, mode=mode
        )

    async def agent(self, tenant: str, name: str) -> Agent | None:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(_one, tenant, name)

    async def agent_version(self, tenant: str, name: str, version: int) -> AgentVersion | None:
        query = sa.select(agent_versions).where(
            _v.tenant == tenant, _v.name == name, _v.version == version
        )
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _version_of(row)

    async def list_agents(
        self, tenant: str, *, limit: int, offset: int, include_archived: bool
    ) -> list[Agent]:
        query = sa.select(agents).where(_a.tenant == tenant)
        if not include_archived:
            query = query.where(_a.archived == sa.false())
        query = query.order_by(_a.name).limit(limit).offset(offset)
        async with self.engines.reader.connect() as conn:
            rows = (await conn.execute(query)).all()
            names = [row.name for row in rows]
            aliases = await conn.execute(
                sa.select(_al.name, _al.alias, _al.version).where(
                    _al.tenant == tenant, _al.name.in_(names)
                )
            )
            by_name: dict[str, dict[str, int]] = {name: {} for name in names}
            for alias in aliases:
                by_name[alias.name][alias.alias] = alias.version
        return [_agent_of(row, by_name[row.name]) for row in rows]

    async def agent_versions(
        self, tenant: str, name: str, *, limit: int, offset: int
    ) -> list[AgentVersion]:
        query = (
            sa.select(agent_versions)
            .where(_v.tenant == tenant, _v.name == name)
            .order_by(_v.version.desc())
            .limit(limit)
            .offset(offset)
        )
        async with self.engines.reader.connect() as conn:
            return [_version_of(row) for row in await conn.execute(query)]

    async def set_agent_alias(
        self, tenant: str, name: str, alias: str, version: int, *, now: datetime
    ) -> Agent | None:
        return await self.engines.writer.write(set_alias, tenant, name, alias, version, now=now)

    async def archive_agent(self, tenant: str, name: str, *, now: datetime) -> Agent | None:
        return await self.engines.writer.write(archive, tenant, name, now=now)
