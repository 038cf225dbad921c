-- Bodies of step records too large for Redis (worker/steps.py): Redis keeps '@pg:<ref>'
-- in the task's steps hash, the body lives here until expires_at (then `deepagents db
-- prune` deletes it). Written before the reference is recorded; a refused record leaves
-- an orphan body, which expires the same way.
CREATE TABLE step_bodies (
    ref        text        PRIMARY KEY,
    task_id    text        NOT NULL,
    body       bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX step_bodies_expires_at ON step_bodies (expires_at);
