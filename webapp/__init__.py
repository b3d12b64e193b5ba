"""The Job Broker web app: the factory only (one blueprint per area lives in its own module).

Configuration, in the order it is applied (later wins):

1. defaults below;
2. the environment: ``PHOTOMOSAICS_SECRET_KEY`` (signs the client-id cookie; at least 32
   characters, ``webapp.ingress``), ``PHOTOMOSAICS_TRUSTED_PROXIES`` (``webapp.ingress``),
   ``AZURE_STORAGE_CONNECTION_STRING``, ``PHOTOMOSAICS_SECONDARY_CONNECTION_STRING`` (the paired
   account of ``dal.availability.failover``, optional), ``PHOTOMOSAICS_ADMIN_TOKEN`` (operator actions, see
   ``webapp.admin``) and the ``PHOTOMOSAICS_*`` limits of ``dal.config.Settings``;
3. ``test_config``: any Flask key, plus ``SETTINGS`` (a ``Settings``), ``CONNECTION_STRING``,
   ``SECONDARY_CONNECTION_STRING``, ``SSE_POLL_SECONDS`` and ``STORAGE_PROFILE`` (the retry profile,
   "interactive" by default).

No storage client is created here: ``webapp.services`` builds them on first use.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask

from dal.availability.failover import SECONDARY_CONNECTION_STRING_ENV
from dal.config import CONNECTION_STRING_ENV, Settings
from webapp.api_libraries import MAX_LIBRARY_FILES
from webapp.decode_budget import DECODES
from webapp.json_bodies import BodyJSONProvider
from webapp.uploads_request import ClosingRequest

SECRET_KEY_ENV = "PHOTOMOSAICS_SECRET_KEY"
# Room for the form fields around the uploaded file(s) in a multipart body.
_MULTIPART_SLACK = 64 * 1024
_FORM_FIELDS = 16  # room for the non-file fields of any form (name, description, ...)
# werkzeug reads a multipart body in 64 KiB chunks and holds each in the same buffer the limit
# counts (werkzeug.sansio.multipart), so a limit of one chunk refused every photo over 64 KiB: four.
MAX_FIELD_BYTES = 256 * 1024


def _defaults(settings: Settings) -> dict[str, Any]:
    """The app's configuration before a test's overrides: from ``settings`` and the environment."""
    return dict(
        SECRET_KEY=os.environ.get(SECRET_KEY_ENV) or None,
        CONNECTION_STRING=settings.connection_string or Settings.from_env().connection_string,
        SETTINGS=settings,
        # The client id lives in Flask's session: an itsdangerous-signed cookie.
        SESSION_COOKIE_NAME="pm_client",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=os.environ.get("PHOTOMOSAICS_SECURE_COOKIES", "") == "1",
        PERMANENT_SESSION_LIFETIME=60 * 60 * 24 * 365,
        # A body larger than the biggest allowed upload is refused before it is read (413).
        MAX_CONTENT_LENGTH=settings.max_upload_bytes + _MULTIPART_SLACK,
        # A form field that is not a file (a name, a number) is held in memory: 256 KiB at most
        # (413), not the upload's 30 MB; files are spooled to disk and bounded above.
        MAX_FORM_MEMORY_SIZE=MAX_FIELD_BYTES,
        # werkzeug refuses more than 1,000 form parts (413) by default; a library may have
        # MAX_LIBRARY_FILES files, plus its name and description, as the spec states.
        MAX_FORM_PARTS=MAX_LIBRARY_FILES + _FORM_FIELDS,
        SSE_POLL_SECONDS=0.5,
        # A stream ends after this long with a reconnect hint (webapp.streams): no thread held for good.
        SSE_MAX_SECONDS=300.0,
        ADMIN_TOKEN=os.environ.get("PHOTOMOSAICS_ADMIN_TOKEN") or None,  # webapp.admin
        # The port where /metrics and /api/queues need no token (webapp.operator_gate).
        METRICS_PORT=os.environ.get("PHOTOMOSAICS_METRICS_PORT", "").strip() or None,
        # How long a decode waits for room in the decoding budget before a 503 (webapp.decode_budget).
        DECODE_WAIT_SECONDS=2.0,
        # The paired secondary account (dal.availability.failover); None: no failover, today's behaviour.
        SECONDARY_CONNECTION_STRING=os.environ.get(SECONDARY_CONNECTION_STRING_ENV, "").strip() or None,
    )


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Build the app; refuses to start without a secret key (cookies could be forged)."""
    app = Flask(__name__)
    app.request_class = ClosingRequest  # uploads cut short are closed too (webapp.uploads_request)
    app.json = BodyJSONProvider(app)  # a body nested too deeply is malformed JSON, not a 500 (webapp.json_bodies)
    overrides = dict(test_config or {})
    settings: Settings = overrides.pop("SETTINGS", None) or Settings.from_env()
    app.config.from_mapping(_defaults(settings))
    app.config.update(overrides)
    from webapp import ingress

    ingress.check_secret_key(app.config.get("SECRET_KEY"))
    from webapp import admin

    admin.check_admin_token(app.config.get("ADMIN_TOKEN"))
    if not app.config.get("CONNECTION_STRING"):
        raise RuntimeError(
            f"{CONNECTION_STRING_ENV} is not set: start everything with `photomosaics run`, "
            "or point the web app at a storage account (UseDevelopmentStorage=true for a local Azurite)"
        )

    DECODES.configure(settings.web_decode_megapixels, wait_seconds=float(app.config["DECODE_WAIT_SECONDS"]))
    from webapp import (
        api_job_events,
        api_job_images,
        api_job_photos,
        api_jobs,
        api_libraries,
        api_library_photos,
        api_library_uploads,
        api_poison,
        api_print,
        api_pyramid,
        api_reach,
        api_tiles,
        clients,
        csrf,
        errors,
        health,
        metrics,
        pages,
        security,
        services,
        spec,
        streams,
        validation,
        vendor,
    )

    services.init_app(app)
    ingress.init_app(app, trusted_proxies=settings.trusted_proxies)
    streams.init_app(app, per_client=settings.event_streams_per_client, per_process=settings.event_streams_per_process)
    clients.init_app(app)
    csrf.init_app(app)
    errors.init_app(app)
    validation.init_app(app)  # a form field sent twice is 400 (after csrf: a cross-site post is 403 first)
    security.init_app(app)
    app.register_blueprint(api_jobs.bp)
    app.register_blueprint(api_job_events.bp)
    app.register_blueprint(api_job_images.bp)
    app.register_blueprint(api_job_photos.bp)
    app.register_blueprint(api_libraries.bp)
    app.register_blueprint(api_library_uploads.bp)
    app.register_blueprint(api_library_photos.bp)
    app.register_blueprint(api_poison.bp)
    app.register_blueprint(api_print.bp)
    app.register_blueprint(api_pyramid.bp)
    app.register_blueprint(api_reach.bp)
    app.register_blueprint(api_tiles.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(metrics.bp)
    app.register_blueprint(pages.bp)
    app.register_blueprint(spec.bp)
    app.register_blueprint(vendor.bp)
    return app
