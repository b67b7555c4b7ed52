"""Import paths of earlier releases, kept so existing code runs: use :mod:`precision_oat.backends`."""
