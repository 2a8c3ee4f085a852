"""Signing out of the dashboard: HTTP Basic has no sign-out, so this page answers 401.

A browser keeps Basic credentials until it is closed. When a page answers 401 to the
credentials it sent, the browser drops them for the realm (Chromium, Firefox and Safari
do): the next page asks for a username and password again. The page needs no sign-in
itself and shows nothing but how to sign in again.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, render_template

from queuelog.server.auth import REALM

bp = Blueprint("signout", __name__)


@bp.get("/signout")
def signout() -> Any:
    """Always 401, so the browser forgets the credentials it holds for queuelog."""
    return render_template("ui/signout.html"), 401, {
        "WWW-Authenticate": f'Basic realm="{REALM}"'}
