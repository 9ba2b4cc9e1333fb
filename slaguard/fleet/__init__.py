"""The domain as data: card and model catalogues, fleets, requests."""

from slaguard.fleet.catalogue import CardType, ModelSpec
from slaguard.fleet.fleet import Fleet, FleetError, SlaClass, Target, build_fleet, load_fleet
from slaguard.fleet.request import Priority, Request

__all__ = [
    "CardType",
    "Fleet",
    "FleetError",
    "ModelSpec",
    "Priority",
    "Request",
    "SlaClass",
    "Target",
    "build_fleet",
    "load_fleet",
]
