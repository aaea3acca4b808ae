//! Concat along an axis (split and chunk are narrow views).
