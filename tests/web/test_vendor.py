"""The browser libraries the app serves from npm (``webapp.vendor``), and the CSP they need."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from webapp.security import CONTENT_SECURITY_POLICY, OPENSEADRAGON_STYLE_HASH
from webapp.vendor import package_dir


def test_openseadragon_is_served_from_node_modules(client: Any) -> None:
    folder = package_dir("openseadragon")
    assert folder is not None, "OpenSeadragon is not installed: make install (npm ci)"
    with client.get("/vendor/openseadragon/openseadragon.min.js") as script:  # a file response: close it
        assert script.status_code == 200 and "javascript" in script.mimetype
        assert script.data == (folder / "openseadragon.min.js").read_bytes()
    with client.get("/vendor/openseadragon/images/zoomin_rest.png") as image:
        assert image.mimetype == "image/png"
    assert client.get("/vendor/openseadragon/../../azurite/package.json").status_code == 404  # no escape
    page = client.get("/jobs/00000000-0000-4000-8000-000000000000").get_data(as_text=True)
    assert "/vendor/openseadragon/openseadragon.min.js" in page


def test_the_csp_allows_exactly_the_style_openseadragon_injects() -> None:
    folder = package_dir("openseadragon")
    assert folder is not None, "OpenSeadragon is not installed: make install (npm ci)"
    source = (folder / "openseadragon.min.js").read_text()
    [text] = re.findall(r'data-openseadragon-mobile-css","true"\);\w+\.textContent="([^"]*)"', source)
    digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    assert f"sha256-{digest}" == OPENSEADRAGON_STYLE_HASH
    assert f"style-src 'self' '{OPENSEADRAGON_STYLE_HASH}'" in CONTENT_SECURITY_POLICY
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
