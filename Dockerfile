# One image for every role: `photomosaics web|controller|processor|responder`.
# The `demo` extra brings the sample photographs the demo tile library is cut from
# (`photomosaics web --demo-library`); nothing is downloaded at run time.
# The browser libraries the app serves (OpenSeadragon for the job page), from package-lock.json;
# --omit=dev leaves Azurite (a dev dependency: the image talks to a real account or the azurite service).
#
# Base images by tag; NODE_DIGEST and PYTHON_DIGEST ("@sha256:<digest>", e.g. from `docker buildx
# imagetools inspect python:3.11-slim`) pin them: docker build --build-arg PYTHON_DIGEST=@sha256:...
# Empty by default: no digest is invented here (docs/operations.md, "Deployment hardening").
ARG NODE_DIGEST=""
ARG PYTHON_DIGEST=""
FROM node:22-slim${NODE_DIGEST} AS browser-libs
WORKDIR /build
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --loglevel=error

FROM python:3.11-slim${PYTHON_DIGEST}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Dependencies first, exactly as locked (versions and hashes: requirements/runtime.lock), in a
# layer of their own that a code change does not rebuild; then the project itself, without deps.
COPY requirements/runtime.lock ./requirements/
RUN pip install --require-hashes --no-deps -r requirements/runtime.lock
COPY pyproject.toml README.md ./
COPY dal ./dal
COPY mosaic ./mosaic
COPY workers ./workers
COPY webapp ./webapp
COPY photomosaics ./photomosaics
COPY --from=browser-libs /build/node_modules/openseadragon ./node_modules/openseadragon
RUN pip install --no-deps --no-build-isolation . \
    && useradd --create-home --uid 10001 mosaic

USER mosaic
EXPOSE 8080
CMD ["photomosaics", "web", "--host", "0.0.0.0", "--port", "8080"]
