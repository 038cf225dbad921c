-- The audit log: one row per audit event, partitioned by day on the event's own time.
--
-- De-duplication: the primary key is (event_id, ts). A unique key of a partitioned
-- table must contain the partition key; that is honest here because ts is part of the
-- immutable event (set once by the producer and carried in the outbox entry), so a
-- redelivered event always has the same (event_id, ts) and lands in the same partition,
-- where INSERT ... ON CONFLICT DO NOTHING skips it.
--
-- Indexed identifiers use the "C" collation: byte order is all a lookup needs, and it
-- makes the index maintenance of the bulk insert markedly cheaper than locale order.
CREATE TABLE audit_log (
    event_id      uuid             NOT NULL,
    ts            timestamptz      NOT NULL,
    type          text             NOT NULL,
    task_id       text COLLATE "C",
    trace_id      text COLLATE "C",
    span_id       text COLLATE "C",
    agent         text COLLATE "C",
    agent_version text,
    tenant        text,
    intent        text,
    tier          text,
    shard         integer,
    attempt       integer,
    deliveries    integer,
    consumer      text,
    status        text,
    error_code    text,
    error         text,
    reason        text,
    model         text,
    latency_ms    double precision,
    queue_ms      double precision,
    tokens_used   bigint,
    cost_usd      double precision,
    input_hash    text,
    payload       jsonb,
    output        jsonb,
    detail        jsonb,
    written_at    timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, ts)
) PARTITION BY RANGE (ts);

CREATE INDEX audit_log_task_idx  ON audit_log (task_id, ts);
CREATE INDEX audit_log_trace_idx ON audit_log (trace_id, ts) WHERE trace_id IS NOT NULL;
CREATE INDEX audit_log_agent_idx ON audit_log (agent, ts);
CREATE INDEX audit_log_ts_idx    ON audit_log USING brin (ts);

-- Create the partition holding one UTC day if it is missing. Serialised by a
-- transaction-level advisory lock: two writers creating the same day at once would
-- otherwise race on the catalog. Returns true when it created the partition.
CREATE FUNCTION audit_ensure_partition(day date) RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
    part text := 'audit_log_p' || to_char(day, 'YYYYMMDD');
    lo   timestamptz := (day::timestamp AT TIME ZONE 'UTC');
    hi   timestamptz := ((day + 1)::timestamp AT TIME ZONE 'UTC');
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(current_schema() || '.audit_partitions'));
    IF to_regclass(quote_ident(current_schema()) || '.' || quote_ident(part)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.audit_log FOR VALUES FROM (%L) TO (%L)',
                   current_schema(), part, current_schema(), lo, hi);
    RETURN true;
END
$fn$;
