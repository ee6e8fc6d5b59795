"""The kinds of upstream server, one module each: their profiles, loaded from the registry."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from functools import cache

from proxy.config import UpstreamKind
from proxy.server_kinds import KINDS
from proxy.upstream.kinds.profile import ServerKind


@cache
def _loaded(module_name: str) -> ServerKind:
    found = getattr(importlib.import_module(module_name), "PROFILE", None)
    if not isinstance(found, ServerKind):
        raise TypeError(f"{module_name} defines no PROFILE, a ServerKind")
    return found


class Profiles(Mapping[UpstreamKind, ServerKind]):
    """Each registered kind's profile, in the registry's order (proxy/server_kinds.py), its
    module loaded when first asked: the registry is the one list of kinds."""

    def __getitem__(self, kind: UpstreamKind) -> ServerKind:
        return _loaded(KINDS[kind].module_name)

    def __iter__(self) -> Iterator[UpstreamKind]:
        return iter(KINDS)

    def __len__(self) -> int:
        return len(KINDS)


PROFILES = Profiles()
for _registered in KINDS.values():  # every built-in kind loads now: a broken one stops start-up
    _loaded(_registered.module_name)


def profile(kind: UpstreamKind) -> ServerKind:
    """What the proxy knows of servers of `kind`."""
    return PROFILES[kind]


def named(name: str) -> ServerKind | None:
    """The profile of the kind a setting names (`upstream.tokenizer: sglang`), if it is one."""
    return PROFILES[name] if name in KINDS else None
