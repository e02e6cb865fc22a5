"""The ledger schema, defined once in SQLAlchemy Core (its numbered migrations: ``_migrations``)."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.schema import Index

__all__ = [
    "api_runs",
    "assistant_versions",
    "assistants",
    "chat_messages",
    "chat_once",
    "chat_secrets",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoints",
    "cron_fires",
    "crons",
    "effects",
    "events",
    "index_api_runs",
    "indexes_chat",
    "indexes_lineage",
    "indexes_runs_created",
    "indexes_v1",
    "indexes_v2",
    "indexes_v3",
    "indexes_v4",
    "lineage",
    "metadata",
    "node_records",
    "outcomes",
    "runs",
    "schema_version",
    "sessions",
    "sink_cursors",
    "sinks",
    "thread_meta",
    "tokens",
    "waits",
]

metadata = MetaData()

schema_version = Table(
    "stageline_schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("applied_at", Float, nullable=False),
)

runs = Table(
    "stageline_runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("template", String(200), nullable=False),
    Column("template_version", String(100), nullable=False),
    Column("status", String(20), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("inputs", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("error", Text),
    Column("failure_phase", String(50)),
    Column("failed_node", String(200)),
    Column("lease_holder", String(200)),
    Column("lease_expires_at", Float),
    Column("cancel_requested", Boolean, nullable=False),
    Column("last_seq", Integer, nullable=False),
)

node_records = Table(
    "stageline_node_records",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("task_id", String(100), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("try_no", Integer, primary_key=True),
    Column("node", String(200), nullable=False),
    Column("stage", String(300), nullable=False),
    Column("status", String(20), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("metrics", Text, nullable=False),
    Column("error", Text),
    Column("failure_phase", String(50)),
)

events = Table(
    "stageline_events",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("ts", Float, nullable=False),
    Column("kind", String(100), nullable=False),
    Column("category", String(20), nullable=False),
    Column("level", String(20), nullable=False),
    Column("node", String(200)),
    Column("message", Text, nullable=False),
    Column("data", Text, nullable=False),
)

indexes_v1 = [
    Index("ix_stageline_runs_status", runs.c.status, runs.c.created_at),
    Index("ix_stageline_runs_template", runs.c.template, runs.c.created_at),
]

# -- migration 2: gates, questions and the side-effect journal ---------------------------------

waits = Table(
    "stageline_waits",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("wait_id", String(200), primary_key=True),
    Column("round", Integer, primary_key=True),
    Column("kind", String(20), nullable=False),
    Column("name", String(200), nullable=False),
    Column("node", String(200), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("interrupt_id", String(100), nullable=False),
    Column("payload", Text, nullable=False),
    Column("requested_at", Float, nullable=False),
    Column("deadline_at", Float),
    Column("policy", Text, nullable=False),
    Column("policy_step", Integer, nullable=False),
    Column("status", String(20), nullable=False),
    Column("response", Text),
    Column("actor", String(200)),
    Column("note", Text),
    Column("decided_at", Float),
    Column("settled_at", Float),
    Column("reason", Text),
)
"""Gate decisions and question sets: one row per round; a round is decided at most once."""

effects = Table(
    "stageline_effects",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("node", String(200), primary_key=True),
    Column("key", String(300), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("status", String(20), nullable=False),
    Column("result", Text),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
)
"""The side-effect journal: what ``ctx.effect`` ran, at most once per (run, node, key)."""

indexes_v2 = [
    Index("ix_stageline_waits_status", waits.c.status, waits.c.requested_at),
]


# -- migration 3: capability outcomes -------------------------------------------------------

outcomes = Table(
    "stageline_outcomes",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("task_id", String(100), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("try_no", Integer, primary_key=True),
    Column("template", String(200), nullable=False),
    Column("node", String(200), nullable=False),
    Column("stage", String(300), nullable=False),
    Column("capability", String(200)),
    Column("alternative", String(200)),
    Column("input_shape", String(64), nullable=False),
    Column("status", String(20), nullable=False),
    Column("failure_phase", String(50)),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float, nullable=False),
    Column("latency", Float, nullable=False),
    Column("input_tokens", Float, nullable=False),
    Column("output_tokens", Float, nullable=False),
    Column("cost", Float, nullable=False),
    Column("quality", Float),
)
"""One row per node run (the router's and ``stats``' training signal). Not tied to the run's
other rows: ``delete_run`` (retention) keeps a run's outcomes."""

indexes_v3 = [
    Index("ix_stageline_outcomes_template", outcomes.c.template, outcomes.c.finished_at),
]


# -- migration 4: the sinks' outbox cursors ---------------------------------------------------

sinks = Table(
    "stageline_sinks",
    metadata,
    Column("sink_id", String(200), primary_key=True),
    Column("started_at", Float, nullable=False),
    Column("watermark", Float, nullable=False),
)
"""Each configured sink, by its stable id: it gets events from ``started_at`` (when it was
first configured) on; every event before ``watermark`` was delivered (or given up)."""

sink_cursors = Table(
    "stageline_sink_cursors",
    metadata,
    Column("sink_id", String(200), primary_key=True),
    Column("run_id", String(64), primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("claimed_by", String(200)),
    Column("claimed_until", Float),
    Column("attempts", Integer, nullable=False),
    Column("retry_at", Float),
    Column("batch_upto", Integer),
    Column("updated_at", Float, nullable=False),
)
"""Per sink and run: the last event ``seq`` the sink acknowledged, which deliverer holds the
run's next batch (until when), and the failed attempts of that batch (backing off until
``retry_at``; a retry sends the same batch, up to ``batch_upto``)."""

indexes_v4 = [Index("ix_stageline_events_ts", events.c.ts)]


# -- migration: lineage (forks) --------------------------------------------------------------

lineage = Table(
    "stageline_lineage",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("parent_run_id", String(64), nullable=False),
    Column("parent_step", Integer),
    Column("parent_checkpoint_id", String(100), nullable=False),
    Column("created_at", Float, nullable=False),
)
"""Where a forked run came from: the run, the step it starts at, the checkpoint it copied."""

indexes_lineage = [
    Index("ix_stageline_lineage_parent", lineage.c.parent_run_id, lineage.c.created_at),
]


# -- migration: API tokens (`stageline token`, `stageline serve`) -----------------------------

tokens = Table(
    "stageline_tokens",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("scope", String(20), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float),
    Column("last_used_at", Float),
)
"""API tokens: a name (the actor of what the token does), a scope and the SHA-256 of its
secret; the secret itself is never stored."""


# -- migration: the runs list, newest first (the dashboard's first page) ------------------------

indexes_runs_created = [
    Index("ix_stageline_runs_created", runs.c.created_at, runs.c.run_id),
]


# -- migration: the LangGraph-compatible API's threads and runs --------------------------------

thread_meta = Table(
    "stageline_thread_meta",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("metadata", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
"""A LangGraph thread's metadata (the thread id is the run id; the run may not exist yet)."""

api_runs = Table(
    "stageline_api_runs",
    metadata,
    Column("api_run_id", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("assistant_id", String(200), nullable=False),
    Column("status", String(20), nullable=False),
    Column("metadata", Text, nullable=False),
    Column("error", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
"""A LangGraph API run: one advance (start or resume) of the run ``run_id``."""


index_api_runs = Index("ix_stageline_api_runs_run", api_runs.c.run_id, api_runs.c.created_at)


# -- migration: two-way chat (Slack threads and messages, one-time keys, the link secret) ------

chat_messages = Table(
    "stageline_chat_messages",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("channel", String(100), nullable=False),
    Column("ts", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
)
"""Each chat message posted for a run, by what it shows (``root``: the run's thread; ``wait:ID``
a gate or question set; ``event:SEQ`` a milestone): the thread's and each message's ts."""

chat_once = Table(
    "stageline_chat_once",
    metadata,
    Column("key", String(200), primary_key=True),
    Column("created_at", Float, nullable=False),
)
"""Keys used once: Slack event ids already handled, decision links already used."""

chat_secrets = Table(
    "stageline_chat_secrets",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(200), nullable=False),
    Column("created_at", Float, nullable=False),
)
"""Server secrets made on first use (the key decision links are signed with)."""

indexes_chat = [
    Index("ix_stageline_chat_messages_ts", chat_messages.c.channel, chat_messages.c.ts),
]


# -- migration: stageline's own checkpoint store (LangGraph's tables are converted by upgrade) --

checkpoints = Table(
    "stageline_checkpoints",
    metadata,
    Column("thread_id", Text, primary_key=True),
    Column("checkpoint_ns", Text, primary_key=True),
    Column("checkpoint_id", Text, primary_key=True),
    Column("parent_checkpoint_id", Text),
    Column("type", Text, nullable=False),
    Column("checkpoint", LargeBinary, nullable=False),
    Column("metadata", LargeBinary, nullable=False),
)
"""A checkpoint as LangGraph hands it to the saver, serialized by the strict serde, but its
channel values in ``checkpoint_blobs`` (rows written before migration 12 hold them here);
``metadata`` is msgpack of the checkpoint's metadata. The thread id is the run id."""

checkpoint_writes = Table(
    "stageline_checkpoint_writes",
    metadata,
    Column("thread_id", Text, primary_key=True),
    Column("checkpoint_ns", Text, primary_key=True),
    Column("checkpoint_id", Text, primary_key=True),
    Column("task_id", Text, primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("task_path", Text, nullable=False),
    Column("channel", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("value", LargeBinary),
)
"""A pending write of a task to the checkpoint it was made on (LangGraph's ``put_writes``)."""


# -- migration: channel values stored once per version, a growing list as what it appended ------

checkpoint_blobs = Table(
    "stageline_checkpoint_blobs",
    metadata,
    Column("thread_id", Text, primary_key=True),
    Column("checkpoint_ns", Text, primary_key=True),
    Column("channel", Text, primary_key=True),
    Column("version", Text, primary_key=True),
    Column("type", Text, nullable=False),
    Column("blob", LargeBinary, nullable=False),
    Column("base_version", Text),
)
"""A channel's value at one version, written by the step that made that version (see
``_deltas``); a checkpoint row then holds no values, only their versions. ``type`` is the
serializer's, or ``empty`` (the channel has a version but no value), or ``stageline-delta``:
the items appended to the list stored at ``base_version`` of the same channel and thread. A row
is never changed once written."""


# -- migration 13: dashboard sessions (renumber at merge if another took 13) ------------------

sessions = Table(
    "stageline_sessions",
    metadata,
    Column("session_hash", String(64), primary_key=True),
    Column("token_hash", String(64), nullable=False, index=True),
    Column("created_at", Float, nullable=False),
    Column("last_seen_at", Float, nullable=False),
)
"""A dashboard session: the SHA-256 of its cookie's id (never the id) and its token's hash."""


# -- migration 14 (schema version 13): LangGraph assistants, configured variants of a template --

_ASSISTANT_COLUMNS = (
    ("graph_id", String(200)),
    ("name", String(200)),
    ("description", Text),
    ("config", Text),
    ("context", Text),
    ("metadata", Text),
)

assistants = Table(
    "stageline_assistants",
    metadata,
    Column("assistant_id", String(200), primary_key=True),
    Column("version", Integer, nullable=False),
    *(Column(name, kind, nullable=name == "description") for name, kind in _ASSISTANT_COLUMNS),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
"""An assistant as it is now: its latest version (or the one ``set_latest`` chose) copied
from ``assistant_versions``; config, context and metadata are JSON."""

assistant_versions = Table(
    "stageline_assistant_versions",
    metadata,
    Column("assistant_id", String(200), primary_key=True),
    Column("version", Integer, primary_key=True),
    *(Column(name, kind, nullable=name == "description") for name, kind in _ASSISTANT_COLUMNS),
    Column("created_at", Float, nullable=False),
)
"""Every version of an assistant (each create or update writes one, never changed)."""

# -- schema version 14: schedules (LangGraph's crons) --------------------------------------

crons = Table(
    "stageline_crons",
    metadata,
    Column("cron_id", String(64), primary_key=True),
    Column("assistant_id", Text, nullable=False),
    Column("thread_id", String(64)),
    Column("schedule", Text, nullable=False),
    Column("timezone", Text),
    Column("payload", Text, nullable=False),
    Column("metadata", Text, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("end_time", Float),
    Column("next_run_at", Float, index=True),
    Column("created_by", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
"""A schedule (LangGraph's cron): what it starts (``payload``: input, context), when
(``schedule`` in ``timezone``), and its next due time (None: it is over)."""

cron_fires = Table(
    "stageline_cron_fires",
    metadata,
    Column("cron_id", String(64), primary_key=True),
    Column("due_at", Float, primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("fired_at", Float, nullable=False),
)
"""One firing of a schedule: the due time it was for and the run it started (its lineage)."""
