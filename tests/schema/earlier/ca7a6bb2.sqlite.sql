CREATE TABLE agentgate_schema (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    call_hash TEXT NOT NULL,
    requester TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
    approver TEXT,
    quorum INTEGER NOT NULL DEFAULT 1 CHECK (quorum >= 1),
    created REAL NOT NULL,
    expires_at REAL NOT NULL,
    decided_at REAL,
    consumed_at REAL
);
CREATE INDEX approvals_call ON approvals (call_hash);
CREATE TABLE approval_votes (
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    approver TEXT NOT NULL,
    decided_at REAL NOT NULL,
    PRIMARY KEY (approval_id, approver)
);
CREATE TABLE approval_asked (
    approval_id TEXT PRIMARY KEY REFERENCES approvals (id),
    audit_index INTEGER NOT NULL
);
CREATE TABLE approval_grants (
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    grant_id TEXT NOT NULL,
    PRIMARY KEY (approval_id, grant_id)
);
CREATE TABLE approval_counted (
    approval_id TEXT PRIMARY KEY REFERENCES approvals (id),
    voters TEXT NOT NULL
);
CREATE TABLE approval_calls (
    approval_id TEXT PRIMARY KEY REFERENCES approvals (id),
    call_key TEXT NOT NULL,
    asked_in TEXT NOT NULL
);
CREATE INDEX approval_calls_key ON approval_calls (call_key);
CREATE TABLE audit_log (
    idx INTEGER PRIMARY KEY,
    entry BLOB NOT NULL,
    leaf_hash BLOB NOT NULL CHECK (length(leaf_hash) = 32)
);
CREATE TABLE audit_checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TRIGGER audit_log_next_index BEFORE INSERT ON audit_log
WHEN NEW.idx IS NOT (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log)
BEGIN SELECT RAISE(ABORT, 'audit_log: index must be the next one'); END;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_checkpoints_no_update BEFORE UPDATE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TRIGGER audit_checkpoints_no_delete BEFORE DELETE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TRIGGER audit_checkpoints_no_replace BEFORE INSERT ON audit_checkpoints
WHEN NEW.id IN (SELECT id FROM audit_checkpoints)
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TABLE broker_state (
    broker TEXT PRIMARY KEY,
    taken_at REAL NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE broker_leases (
    broker TEXT NOT NULL,
    lease_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    priority INTEGER NOT NULL,
    gpus TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('active', 'notified')),
    granted_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    notice_deadline REAL,
    preempted_by TEXT,
    body TEXT NOT NULL,
    PRIMARY KEY (broker, lease_id)
);
CREATE TABLE broker_writer (
    broker TEXT PRIMARY KEY,
    writer TEXT NOT NULL
);
CREATE TABLE broker_queue (
    broker TEXT NOT NULL,
    request_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    priority INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    submitted_at REAL NOT NULL,
    deadline REAL,
    nominated TEXT NOT NULL,
    victims TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (broker, request_id)
);
CREATE TABLE broker_decisions (
    broker TEXT NOT NULL,
    request_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    chain_hash TEXT NOT NULL,
    resource TEXT NOT NULL,
    audit_index INTEGER,
    cost_per_gpu_hour INTEGER,
    reservations TEXT NOT NULL,
    PRIMARY KEY (broker, request_id)
);
CREATE TABLE agentgate_grants (
    id TEXT PRIMARY KEY,
    parent TEXT,
    issuer TEXT NOT NULL,
    audience TEXT NOT NULL,
    expires INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    token TEXT NOT NULL
);
CREATE INDEX agentgate_grants_parent ON agentgate_grants (parent);
CREATE INDEX agentgate_grants_audience ON agentgate_grants (audience);
CREATE TABLE agentgate_revocations (
    grant_id TEXT PRIMARY KEY,
    revoked_at INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE agentgate_nonces (
    expires INTEGER NOT NULL,
    principal TEXT NOT NULL,
    nonce TEXT NOT NULL,
    PRIMARY KEY (expires, principal, nonce)
) WITHOUT ROWID;
CREATE TABLE budget_ledger (
    grant_id TEXT PRIMARY KEY,
    cap INTEGER NOT NULL CHECK (cap >= 0),
    remaining INTEGER NOT NULL CHECK (remaining >= 0),
    spent INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE budget_reservations (
    id TEXT PRIMARY KEY,
    chain TEXT NOT NULL,
    amount INTEGER NOT NULL CHECK (amount >= 0),
    state TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'released')),
    actual INTEGER,
    created TEXT NOT NULL,
    settled TEXT,
    entry INTEGER,
    unit TEXT
) WITHOUT ROWID;
CREATE TABLE agentgate_once (
    key TEXT PRIMARY KEY,
    allow_index INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'ok', 'error', 'paused', 'not_run')),
    reservations TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE agentgate_store_parts (
    part TEXT PRIMARY KEY,
    made TEXT NOT NULL
);
CREATE TRIGGER agentgate_store_parts_no_update BEFORE UPDATE ON agentgate_store_parts
BEGIN SELECT RAISE(ABORT, 'agentgate_store_parts is append-only'); END;
CREATE TRIGGER agentgate_store_parts_no_delete BEFORE DELETE ON agentgate_store_parts
BEGIN SELECT RAISE(ABORT, 'agentgate_store_parts is append-only'); END;
CREATE TABLE quota_usage (
    quota TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    used INTEGER NOT NULL CHECK (used >= 0),
    PRIMARY KEY (quota, window_start)
);
CREATE TABLE audit_refs (
    idx INTEGER PRIMARY KEY,
    ref INTEGER NOT NULL
);
CREATE INDEX audit_refs_by_ref ON audit_refs (ref);
CREATE TABLE audit_refs_built (built INTEGER PRIMARY KEY CHECK (built = 1));
CREATE TABLE audit_nodes (
    level INTEGER NOT NULL,
    position INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (level, position)
);
CREATE TRIGGER audit_log_index_ref AFTER INSERT ON audit_log
WHEN json_valid(CAST(NEW.entry AS TEXT)) AND json_type(CAST(NEW.entry AS TEXT), '$.ref') = 'integer'
BEGIN
    INSERT OR REPLACE INTO audit_refs (idx, ref)
    VALUES (NEW.idx, json_extract(CAST(NEW.entry AS TEXT), '$.ref'));
END;
CREATE TABLE audit_repairs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    what TEXT NOT NULL,
    log_size INTEGER,
    checkpoint_size INTEGER,
    accepts INTEGER,
    accepted_by TEXT,
    reason TEXT
);
CREATE TRIGGER audit_repairs_no_update BEFORE UPDATE ON audit_repairs
BEGIN SELECT RAISE(ABORT, 'audit_repairs is append-only'); END;
CREATE TRIGGER audit_repairs_no_delete BEFORE DELETE ON audit_repairs
BEGIN SELECT RAISE(ABORT, 'audit_repairs is append-only'); END;
CREATE TABLE agentgate_dead_letters (
    id TEXT PRIMARY KEY,
    recorded_at REAL NOT NULL,
    tool TEXT NOT NULL,
    tenant TEXT NOT NULL,
    principal TEXT NOT NULL,
    run_id TEXT,
    call_id TEXT,
    idempotency_key TEXT,
    arguments_digest TEXT NOT NULL,
    authority_chain TEXT NOT NULL,
    reason TEXT NOT NULL,
    errors TEXT NOT NULL
);
CREATE INDEX agentgate_dead_letters_time ON agentgate_dead_letters (recorded_at);
