"""``autoshard models`` lists the catalog from data (:mod:`autoshard.models.catalog.listing`): the data must be what
the catalog builds."""

from __future__ import annotations

from autoshard.models import catalog
from autoshard.models.catalog.listing import LISTING, measure, render


def test_the_listing_is_what_the_catalog_builds():
    measured = measure()
    assert measured == LISTING, (
        "autoshard/models/catalog/listing.py is out of date with the catalog; replace LISTING with:\n"
        + render(measured))
    assert [entry.name for entry in LISTING] == catalog.names()
