//! eagerio over glommio (being written).
