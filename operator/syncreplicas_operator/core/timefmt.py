"""RFC 3339 timestamps as Kubernetes writes them (UTC; second or microsecond precision),
both ways."""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC, second precision, as Kubernetes writes timestamps."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """RFC 3339 in UTC with microseconds: a MicroTime (a Lease's acquireTime, renewTime)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> datetime | None:
    """An aware UTC datetime from an RFC 3339 string; None for anything else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None

