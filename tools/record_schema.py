"""Record the statements the migrations run on an empty catalog, per dialect, into
crawler/catalog/recorded/ (what crawler.catalog.fresh_schema replays for a new catalog).

    python tools/record_schema.py POSTGRESQL_URL

POSTGRESQL_URL names a server where a throwaway database may be made (``bash .ci/pg.sh`` starts
one); it should have pg_trgm, as a new catalog then gets the name index (a server without it
fails the replay and migrates). Run it after adding a migration: tests/catalog/
test_fresh_schema.py fails while the recordings are not of the head revision.
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crawler.catalog import Catalog
from crawler.catalog.fresh_schema import RECORDED, record
from crawler.catalog.reader import SCHEMA_HEAD


def _recorded(url: str) -> list[list[object]]:
    def migrate(tracer: Callable[[str, Any], None]) -> None:
        with Catalog.open(url, upgrade=False, check=False, tracer=tracer) as catalog:
            catalog.upgrade(replay=False)

    return record(migrate)


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    admin = create_engine(sys.argv[1], isolation_level="AUTOCOMMIT")
    name = f"quants_record_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        pg = make_url(sys.argv[1]).set(database=name).render_as_string(hide_password=False)
        with tempfile.TemporaryDirectory() as tmp:
            urls = {"sqlite": f"sqlite:///{tmp}/catalog.sqlite", "postgresql": pg}
            RECORDED.mkdir(exist_ok=True)
            for dialect, url in urls.items():
                out = {"revision": SCHEMA_HEAD, "statements": _recorded(url)}
                path = RECORDED / f"{dialect}.json"
                path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
                print(f"{path}: {len(out['statements'])} statements at {SCHEMA_HEAD}")
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
