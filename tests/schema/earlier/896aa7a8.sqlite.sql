CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    call_hash TEXT NOT NULL,
    requester TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
    approver TEXT,
    created REAL NOT NULL,
    expires_at REAL NOT NULL,
    decided_at REAL,
    consumed_at REAL
);
CREATE INDEX approvals_call ON approvals (call_hash);
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
CREATE TABLE broker_state (
    broker TEXT PRIMARY KEY,
    taken_at REAL NOT NULL
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
    settled TEXT
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
CREATE TABLE agentgate_revocations (
    grant_id TEXT PRIMARY KEY,
    revoked_at INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE agentgate_nonces (
    principal TEXT NOT NULL,
    nonce TEXT NOT NULL,
    expires INTEGER NOT NULL,
    PRIMARY KEY (principal, nonce)
);
CREATE INDEX agentgate_nonces_expires ON agentgate_nonces (expires);
