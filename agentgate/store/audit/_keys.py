"""The log's settings from the environment: its origin (``log_origin``), the bound on an entry's
bytes (``entry_limit``), and its signing key (``open_log_key``: where it lives, ``log_key_path``;
when one may be created; the public keys of keys rotated out, ``previous_log_keys``)."""

from __future__ import annotations

import os
from pathlib import Path

from agentgate.audit.entry import DEFAULT_MAX_ENTRY_BYTES, MAX_MAX_ENTRY_BYTES, MIN_MAX_ENTRY_BYTES
from agentgate.audit.note import key_id, signer_key_ids
from agentgate.errors import InputError, KeyFileError, StoreError
from agentgate.keys import PublicKey, SigningKey, load_public_key, load_signing_key, refuse_key_text, save_key
from agentgate.store._base import Store, env_setting, loaded_driver_errors
from agentgate.store._sqlite import SQLiteStore
from agentgate.store.audit._schema import refuse_dropped_log
from agentgate.store.audit._stored import _note, latest_checkpoint_row

DEFAULT_ORIGIN = "agentgate.local/audit"


def log_origin() -> str:
    """The log's origin: ``AGENTGATE_LOG_ORIGIN``, else ``agentgate.local/audit``."""
    return os.environ.get("AGENTGATE_LOG_ORIGIN") or DEFAULT_ORIGIN


def entry_limit(configured: int | None = None) -> int:
    """The bound on one entry's bytes: ``configured``, else ``AGENTGATE_AUDIT_MAX_ENTRY_BYTES``,
    else ``DEFAULT_MAX_ENTRY_BYTES``. Raises ``InputError``, naming where the value came from, when
    it is not a whole number from ``MIN_MAX_ENTRY_BYTES`` to ``MAX_MAX_ENTRY_BYTES``."""
    source = "audit entry limit" if configured is not None else "AGENTGATE_AUDIT_MAX_ENTRY_BYTES"
    if configured is None:
        configured = env_setting(source, int, DEFAULT_MAX_ENTRY_BYTES, "a whole number of bytes")
    if type(configured) is not int or not MIN_MAX_ENTRY_BYTES <= configured <= MAX_MAX_ENTRY_BYTES:
        raise InputError(
            f"{source} must be from {MIN_MAX_ENTRY_BYTES} to {MAX_MAX_ENTRY_BYTES} bytes, "
            f"got {str(configured)[:80]}"
        )
    return configured


def log_signer(signer: object) -> SigningKey | PublicKey:
    """``signer``, the key an ``AuditLog`` was given, when it is a ``SigningKey`` (the log key) or
    a ``PublicKey`` (its public key: a log opened to read); ``InputError`` naming ``signer``
    otherwise. Until review R91 ``None`` or raw key bytes were taken, appends went on, and the
    first checkpoint, verify or explain failed naming ``public_key``, an argument never given."""
    if isinstance(signer, SigningKey | PublicKey):
        return signer
    binary = isinstance(signer, bytes | bytearray | memoryview)
    hint = ": wrap the 32 raw key bytes as SigningKey(raw), or PublicKey(raw) to read only" if binary else ""
    raise InputError(
        f"signer must be a SigningKey or PublicKey (agentgate.keys), got {type(signer).__name__}{hint}"
    )


def _previous_specs() -> list[str]:
    """What ``AGENTGATE_LOG_PREVIOUS_KEYS`` names: its comma-separated parts that are not blank."""
    return [
        spec.strip() for spec in os.environ.get("AGENTGATE_LOG_PREVIOUS_KEYS", "").split(",") if spec.strip()
    ]


def previous_log_keys() -> list[PublicKey]:
    """Public keys of rotated-out log keys: ``AGENTGATE_LOG_PREVIOUS_KEYS``, comma-separated files or dids."""
    keys = []
    for spec in _previous_specs():
        try:
            keys.append(load_public_key(spec))
        except KeyFileError as exc:
            raise KeyFileError(f"AGENTGATE_LOG_PREVIOUS_KEYS: {exc}") from exc
    return keys


def log_key_path(store: Store) -> Path:
    """Where the log key lives for ``store`` (see the module docstring). Raises ``KeyFileError``
    when ``AGENTGATE_LOG_KEY`` is set but empty (``AGENTGATE_LOG_KEY=$UNSET`` in an env file):
    read as unset, a new key would be made beside the store and sign the log's next checkpoint,
    and the operator's real key would then find the log tampered with."""
    configured = os.environ.get("AGENTGATE_LOG_KEY")
    if configured == "":
        raise KeyFileError(
            "AGENTGATE_LOG_KEY is set but empty: point it at the log key's file, or unset it for the default"
        )
    if configured:
        refuse_key_text(configured, "AGENTGATE_LOG_KEY")
    if configured and configured != configured.strip():
        # A leading space makes the path relative (a key made under ``./ /...``); a trailing
        # ``\r`` (an env file saved with CRLF endings) names a file beside the real one.
        raise KeyFileError(
            f"AGENTGATE_LOG_KEY={configured!r} begins or ends with white space or a line break: remove it"
        )
    if configured:
        return Path(configured)
    if isinstance(store, SQLiteStore):
        return store.path.parent / "log.key"
    return Path(".agentgate") / "log.key"


def open_log_key(store: Store, *, create: bool = True) -> SigningKey:
    """The log's signing key, created (0600, with ``log.pub`` beside it) on first use if ``create``.

    A key is created only for a log that has no checkpoint yet, or while the key is being rotated
    (its latest checkpoint signed by a key ``AGENTGATE_LOG_PREVIOUS_KEYS`` names, ``_may_make_key``):
    checkpoints signed by a key that is not where this process looks (another working directory,
    an unset ``AGENTGATE_LOG_KEY``, a missing mount) mean the key is missing, not that a new one
    is wanted. Raises ``KeyFileError`` when the file is unreadable, too
    widely readable, or missing and ``create`` is false or no key may be created.
    """
    path = log_key_path(store)
    if not create or (path.exists() and not _left_half_made(path, store)):
        return load_signing_key(path)
    refuse_new_log_key(store, path)
    try:
        save_key(SigningKey.generate(), path.parent, path.stem)
    except KeyFileError:
        if not path.exists():
            raise
    return load_signing_key(path)  # another process may have won the race: use its key


def refuse_new_log_key(store: Store, path: Path) -> None:
    """Raise ``KeyFileError`` when ``open_log_key`` may not create a log key at ``path``: a name
    that does not end in ``.key``, or a log with checkpoints and no key rotation under way
    (``_may_make_key``); and ``LogDropped`` for a log that was dropped (no new key for a log made
    anew in its place)."""
    if path.suffix != ".key":
        raise KeyFileError(f"{path}: AGENTGATE_LOG_KEY must name a file ending in .key")
    refuse_dropped_log(store)
    if _may_make_key(store):
        return
    if not _previous_specs():
        raise KeyFileError(
            f"{path}: no log key there, but this audit log has checkpoints signed by one; point "
            "AGENTGATE_LOG_KEY at it (to rotate the key, list the old public key in "
            "AGENTGATE_LOG_PREVIOUS_KEYS first). No key was created."
        )
    raise KeyFileError(
        f"{path}: no log key there, but this audit log's latest checkpoint is signed by a key that "
        "AGENTGATE_LOG_PREVIOUS_KEYS does not list (the key in use since the rotation); point "
        "AGENTGATE_LOG_KEY at it (to rotate it, list its public key in AGENTGATE_LOG_PREVIOUS_KEYS "
        "first). No key was created."
    )


def _may_make_key(store: Store) -> bool:
    """Whether a log key may be made for ``store``'s log: one with no checkpoint yet, or one whose
    latest checkpoint is signed by a key ``AGENTGATE_LOG_PREVIOUS_KEYS`` names (a rotation under
    way: the old key moved aside, no checkpoint signed by a new one). Once a key not listed there
    has signed the latest checkpoint, the rotation is done, and a key not found is missing (until
    review R86 a key was made whenever the variable was set, which the rotation leaves set, and
    the log it signed was then reported as possibly tampered with, exit 1). The key ids are
    compared, none verified: ``verify`` judges the signatures."""
    latest = _latest_note(store)
    if latest is None:
        return True
    origin = latest.partition("\n")[0]  # the name a checkpoint's signatures are made under
    signers = set(signer_key_ids(latest, origin))
    return any(key_id(origin, key).hex() in signers for key in previous_log_keys())


def _left_half_made(path: Path, store: Store) -> bool:
    """Whether ``path`` is a log key that a process killed while creating it left without its
    ``.pub`` (``save_key`` was stopped between its two links), and a key may be made instead.

    Such a key is still linked to a temporary file of ``save_key``, and the next ``save_key`` in
    its directory (``agentgate keys new --dir`` there) removes it: signing checkpoints with it
    would lose the log key later. ``save_key`` then takes it away and makes a whole pair. A key
    without ``.pub`` that is linked nowhere else (one installed by hand, a mounted secret) is the
    log key, and so is such a key on a log with checkpoints (a version without this check may
    have signed them with it), and so is a key of any other name than ``*.key``, which
    ``save_key`` never makes (until review R95 one with a second link, a backup made with ``ln``
    or ``cp -al``, was taken for half made, and the new key then refused for its name).
    """
    if path.suffix != ".key":
        return False
    try:
        if path.stat().st_nlink < 2 or path.with_suffix(".pub").exists():
            return False
    except OSError:
        return False
    return _may_make_key(store)


def _latest_note(store: Store) -> str | None:
    """The signed note of ``store``'s latest checkpoint (as ``AuditLog.latest_checkpoint`` reads
    it: the largest tree, the last stored of those); ``None`` for a log with none, or no log."""
    try:
        row = latest_checkpoint_row(store)
    except loaded_driver_errors(StoreError):
        return None  # no audit tables yet
    return _note(row[2]) if row else None


def _has_checkpoints(store: Store) -> bool:
    """Whether ``store`` holds an audit log with at least one checkpoint."""
    try:
        return bool(store.query("SELECT 1 FROM audit_checkpoints LIMIT 1"))
    except loaded_driver_errors(StoreError):
        return False  # no audit tables yet
