"""interplab widgets: anywidgets that render engine results inline (no engine logic here)."""

__all__: list[str] = []
