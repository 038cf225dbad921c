"""Model providers behind one small interface (``base.Provider``)."""
