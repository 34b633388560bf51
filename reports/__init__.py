"""Plotly figures and the HTML report builder (not built yet)."""
