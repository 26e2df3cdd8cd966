"""The model wing: the :class:`Model` (an nnsight model with named sites), the site table, activations in
memory, what a trace body may call (``trace_ops``), eager attention for patterns, the run lock, context and
memory limits, and the NDIF client a remote model sends its requests through.

Example
-------
>>> from interplab.core.model import Model, parse_site
>>> parse_site("blocks.6.hook_resid_post").layer
6
"""

from .activations import Activations
from .model import Model, free_trace_memory
from .remote import RemoteModelError
from .sites import KINDS, Family, Site, parse_site, parse_sites, resolve_sites, site_name, site_names

__all__ = [
    "KINDS",
    "Activations",
    "Family",
    "Model",
    "RemoteModelError",
    "Site",
    "free_trace_memory",
    "parse_site",
    "parse_sites",
    "resolve_sites",
    "site_name",
    "site_names",
]
