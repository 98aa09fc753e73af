"""Hand-written argument builders (sans-IO) of geo commands. Each takes the method's
parameters and returns ``(args, callback)``."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import DataError
from ..resp import CommandArg
from .builders import Built
from .callbacks import geo_items
from .types import EncodableT, KeyT

__all__ = [
    "build_geoadd",
    "build_georadius",
    "build_georadiusbymember",
    "build_geosearch",
    "build_geosearchstore",
]


def _geo_radius_tail(
    args: list[CommandArg],
    unit: str | None,
    withdist: bool,
    withcoord: bool,
    withhash: bool,
    count: int | None,
    sort: str | None,
    store: KeyT | None,
    store_dist: KeyT | None,
    any: bool,
) -> Built:
    args.append(unit or "m")
    for flag, on in (("WITHDIST", withdist), ("WITHCOORD", withcoord), ("WITHHASH", withhash)):
        if on:
            args.append(flag)
    if count is not None:
        args += ["COUNT", count]
        if any:
            args.append("ANY")
    elif any:
        raise DataError("any=True needs count")
    if sort is not None:
        args.append(sort.upper())
    if store is not None:
        args += ["STORE", store]
    if store_dist is not None:
        args += ["STOREDIST", store_dist]
    if store is not None or store_dist is not None or not (withdist or withhash or withcoord):
        return tuple(args), None
    return tuple(args), geo_items(withdist, withhash, withcoord)


def build_georadius(
    name: KeyT,
    longitude: float,
    latitude: float,
    radius: float,
    unit: str | None,
    withdist: bool,
    withcoord: bool,
    withhash: bool,
    count: int | None,
    sort: str | None,
    store: KeyT | None,
    store_dist: KeyT | None,
    any: bool,
) -> Built:
    """``GEORADIUS name lon lat radius unit [WITH...] [COUNT n [ANY]] [ASC|DESC] [STORE k]
    [STOREDIST k]``."""
    args: list[CommandArg] = ["GEORADIUS", name, longitude, latitude, radius]
    return _geo_radius_tail(
        args, unit, withdist, withcoord, withhash, count, sort, store, store_dist, any
    )


def build_georadiusbymember(
    name: KeyT,
    member: EncodableT,
    radius: float,
    unit: str | None,
    withdist: bool,
    withcoord: bool,
    withhash: bool,
    count: int | None,
    sort: str | None,
    store: KeyT | None,
    store_dist: KeyT | None,
    any: bool,
) -> Built:
    """``GEORADIUSBYMEMBER name member radius unit ...`` (as :func:`build_georadius`)."""
    args: list[CommandArg] = ["GEORADIUSBYMEMBER", name, member, radius]
    return _geo_radius_tail(
        args, unit, withdist, withcoord, withhash, count, sort, store, store_dist, any
    )


def _geosearch(
    args: list[CommandArg],
    member: EncodableT | None,
    longitude: float | None,
    latitude: float | None,
    unit: str,
    radius: float | None,
    width: float | None,
    height: float | None,
    sort: str | None,
    count: int | None,
    any: bool,
) -> list[CommandArg]:
    if (member is None) == (longitude is None or latitude is None):
        raise DataError("geosearch: give member, or longitude and latitude")
    if (radius is None) == (width is None or height is None):
        raise DataError("geosearch: give radius, or width and height")
    if member is not None:
        args += ["FROMMEMBER", member]
    else:
        args += ["FROMLONLAT", longitude, latitude]  # type: ignore[list-item]
    if radius is not None:
        args += ["BYRADIUS", radius, unit]
    else:
        args += ["BYBOX", width, height, unit]  # type: ignore[list-item]
    if sort is not None:
        args.append(sort.upper())
    if count is not None:
        args += ["COUNT", count]
        if any:
            args.append("ANY")
    elif any:
        raise DataError("geosearch: any=True needs count")
    return args


def build_geosearch(
    name: KeyT,
    member: EncodableT | None,
    longitude: float | None,
    latitude: float | None,
    unit: str,
    radius: float | None,
    width: float | None,
    height: float | None,
    sort: str | None,
    count: int | None,
    any: bool,
    withcoord: bool,
    withdist: bool,
    withhash: bool,
) -> Built:
    """``GEOSEARCH name FROMMEMBER m | FROMLONLAT lon lat BYRADIUS r unit | BYBOX w h unit
    [ASC|DESC] [COUNT n [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]``."""
    args = _geosearch(
        ["GEOSEARCH", name],
        member,
        longitude,
        latitude,
        unit,
        radius,
        width,
        height,
        sort,
        count,
        any,
    )
    for flag, on in (("WITHCOORD", withcoord), ("WITHDIST", withdist), ("WITHHASH", withhash)):
        if on:
            args.append(flag)
    if not (withdist or withhash or withcoord):
        return tuple(args), None
    return tuple(args), geo_items(withdist, withhash, withcoord)


def build_geosearchstore(
    dest: KeyT,
    name: KeyT,
    member: EncodableT | None,
    longitude: float | None,
    latitude: float | None,
    unit: str,
    radius: float | None,
    width: float | None,
    height: float | None,
    sort: str | None,
    count: int | None,
    any: bool,
    storedist: bool,
) -> Built:
    """``GEOSEARCHSTORE dest name ... [STOREDIST]`` (as :func:`build_geosearch`)."""
    args = _geosearch(
        ["GEOSEARCHSTORE", dest, name],
        member,
        longitude,
        latitude,
        unit,
        radius,
        width,
        height,
        sort,
        count,
        any,
    )
    if storedist:
        args.append("STOREDIST")
    return tuple(args), None


def build_geoadd(name: KeyT, values: Sequence[EncodableT], nx: bool, xx: bool, ch: bool) -> Built:
    """``GEOADD name [NX|XX] [CH] lon lat member ...`` from a flat ``values``."""
    if len(values) % 3 != 0:
        raise DataError("geoadd(): values is a flat list of longitude, latitude, name")
    if nx and xx:
        raise DataError("geoadd(): nx and xx are mutually exclusive")
    args: list[CommandArg] = ["GEOADD", name]
    for flag, on in (("NX", nx), ("XX", xx), ("CH", ch)):
        if on:
            args.append(flag)
    args.extend(values)
    return tuple(args), None
