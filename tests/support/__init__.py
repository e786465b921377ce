"""Helpers the tests import (``from tests.support.core import …``): scripted models, servers, scripts."""
