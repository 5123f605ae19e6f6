"""Tenants: API keys (stored hashed), per-pool concurrency caps and fair-share weights."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import Connection, text


@dataclass(frozen=True)
class Tenant:
    id: str
    max_running: int
    weight: int


def hash_key(api_key: str) -> str:
    # Keys are 32 random bytes, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(api_key.encode()).hexdigest()


def create_tenant(conn: Connection, tenant_id: str, max_running: int = 100, weight: int = 1) -> str:
    """Create a tenant (or rotate its key and limits); return the API key, shown only this once."""
    api_key = f"d2k_{secrets.token_urlsafe(32)}"
    conn.execute(text(
        "INSERT INTO tenants (id, api_key_hash, max_running, weight) VALUES (:id, :h, :m, :w)"
        " ON CONFLICT (id) DO UPDATE SET api_key_hash = excluded.api_key_hash,"
        " max_running = excluded.max_running, weight = excluded.weight"),
        {"id": tenant_id, "h": hash_key(api_key), "m": max_running, "w": weight})
    return api_key


def ensure_tenant(conn: Connection, tenant_id: str) -> None:
    """Make sure a tenant exists (the admin CLI submits on behalf of tenants without their key)."""
    if conn.execute(text("SELECT 1 FROM tenants WHERE id = :id"), {"id": tenant_id}).first() is None:
        create_tenant(conn, tenant_id)


def authenticate(conn: Connection, api_key: str) -> Tenant | None:
    row = conn.execute(text("SELECT id, max_running, weight FROM tenants WHERE api_key_hash = :h"),
                       {"h": hash_key(api_key)}).first()
    return Tenant(*row) if row else None
