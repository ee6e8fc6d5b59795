"""Typed keys for what the application and each request carry."""

from __future__ import annotations

from aiohttp import web

from proxy.errors import ProxyError
from proxy.http.body_budget import BodyBudget, HeldBody
from proxy.http.browsers import BrowserPolicy
from proxy.pipeline.exchange import Caller, Exchange
from proxy.pipeline.services import Services

SERVICES = web.AppKey("services", Services)
BROWSERS = web.AppKey("browsers", BrowserPolicy)
BODY_BUDGET = web.AppKey("body_budget", BodyBudget)

REQUEST_ID = web.RequestKey("request_id", str)
UPSTREAM_SECONDS = web.RequestKey("upstream_seconds", float)
ROUTE = web.RequestKey("route", str)
CALLER = web.RequestKey("caller", Caller)
EXCHANGE = web.RequestKey("exchange", Exchange)
FAILURE = web.RequestKey("failure", ProxyError)  # an error sent inside a stream already begun
HELD_BODY = web.RequestKey("held_body", HeldBody)  # given back by the middleware, however it ends
