//! `#[derive(Module)]` for fucina-nn: generates the visits of the `Module`
//! trait (`visit_params`, `visit_params_mut`, `visit_buffers`, `visit_modules`,
//! `visit_modules_mut`, `set_training`) over a struct's fields, in
//! declaration order. The struct must be `'static` (modules are owned), as
//! `visit_modules` hands it out as `dyn Any`.
//!
//! Every field is itself a `Module` (a `Tensor` is a parameter named by its
//! path; `Vec<T>`, `Option<T>` and `Box<T>` are modules), so the derive needs
//! no type inspection: it joins the field's name to the prefix and recurses.
//! Field attributes: `#[module(skip)]` (configuration, dims, caches),
//! `#[module(rename = "LayerNorm")]` (the name in the path), and
//! `#[module(flatten)]` (the field's parameters take the parent's prefix).
//! A container attribute `#[module(crate = "path")]` overrides the path of
//! the fucina-nn crate (default: found from the user's `Cargo.toml`).

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote};
use syn::{parse_macro_input, Data, DeriveInput, Fields, LitStr};

/// Derives `fucina_nn::Module` for a struct whose fields are modules
/// (`Tensor`, layers, `Vec`/`Option`/`Box` of modules) or marked
/// `#[module(skip)]`. See the `fucina_nn::Module` docs for an example.
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// One field's attributes.
#[derive(Default)]
struct FieldAttrs {
    skip: bool,
    flatten: bool,
    rename: Option<String>,
}

fn field_attrs(attrs: &[syn::Attribute]) -> syn::Result<FieldAttrs> {
    let mut out = FieldAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                out.skip = true;
                Ok(())
            } else if meta.path.is_ident("flatten") {
                out.flatten = true;
                Ok(())
            } else if meta.path.is_ident("rename") {
                let s: LitStr = meta.value()?.parse()?;
                out.rename = Some(s.value());
                Ok(())
            } else {
                Err(meta
                    .error("unknown module attribute (expected skip, flatten or rename = \"..\")"))
            }
        })?;
    }
    if out.flatten && out.rename.is_some() {
        return Err(syn::Error::new_spanned(
            &attrs[0],
            "#[module(flatten)] and #[module(rename)] exclude each other",
        ));
    }
    Ok(out)
}

fn container_crate(attrs: &[syn::Attribute]) -> syn::Result<Option<syn::Path>> {
    let mut out = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let s: LitStr = meta.value()?.parse()?;
                out = Some(s.parse::<syn::Path>()?);
                Ok(())
            } else {
                Err(meta.error("unknown container attribute (expected crate = \"path\")"))
            }
        })?;
    }
    Ok(out)
}

/// The path of fucina-nn as the deriving crate sees it, from its manifest:
/// `::fucina_nn` when it names `fucina-nn` (fucina-nn itself has
/// `extern crate self as fucina_nn`), else `::fucina::nn` when it names the
/// umbrella `fucina`, else `::fucina_nn`.
fn crate_path(manifest: &str) -> &'static str {
    let names = |dep: &str| {
        manifest.lines().any(|l| {
            let l = l.trim();
            let key = l
                .trim_start_matches('[')
                .trim_start_matches("dependencies.")
                .trim_start_matches("dev-dependencies.");
            let key = key.split(['=', '.', ']', ' ']).next().unwrap_or("");
            key == dep && !l.starts_with('#')
        })
    };
    if names("fucina-nn") || names("fucina_nn") {
        "::fucina_nn"
    } else if names("fucina") {
        "::fucina::nn"
    } else {
        "::fucina_nn"
    }
}

fn default_crate() -> TokenStream2 {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .ok()
        .and_then(|d| std::fs::read_to_string(std::path::Path::new(&d).join("Cargo.toml")).ok())
        .unwrap_or_default();
    match crate_path(&manifest) {
        "::fucina::nn" => quote!(::fucina::nn),
        _ => quote!(::fucina_nn),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let krate = match container_crate(&input.attrs)? {
        Some(p) => quote!(#p),
        None => default_crate(),
    };
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        _ => {
            return Err(syn::Error::new_spanned(
                &input.ident,
                "#[derive(Module)] supports structs only",
            ))
        }
    };
    let mut visit = Vec::new();
    let mut visit_mut = Vec::new();
    let mut training = Vec::new();
    let mut modules = Vec::new();
    let mut modules_mut = Vec::new();
    let mut buffers = Vec::new();
    let members: Vec<(syn::Member, String, &syn::Field)> = match fields {
        Fields::Named(n) => n
            .named
            .iter()
            .filter_map(|f| {
                f.ident
                    .as_ref()
                    .map(|id| (syn::Member::Named(id.clone()), id.to_string(), f))
            })
            .collect(),
        Fields::Unnamed(u) => u
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| (syn::Member::Unnamed(i.into()), i.to_string(), f))
            .collect(),
        Fields::Unit => Vec::new(),
    };
    for (member, name, field) in &members {
        let a = field_attrs(&field.attrs)?;
        if a.skip {
            continue;
        }
        let name = a
            .rename
            .unwrap_or_else(|| name.trim_start_matches("r#").to_string());
        let path = format_ident!("__path");
        let make_path = if a.flatten {
            quote!(let #path = prefix.to_string();)
        } else {
            quote!(let #path = #krate::module::join(prefix, #name);)
        };
        visit.push(quote! {
            { #make_path #krate::Module::visit_params(&self.#member, &#path, f); }
        });
        visit_mut.push(quote! {
            { #make_path #krate::Module::visit_params_mut(&mut self.#member, &#path, f); }
        });
        buffers.push(quote! {
            { #make_path #krate::Module::visit_buffers(&self.#member, &#path, f); }
        });
        modules.push(quote! {
            { #make_path #krate::Module::visit_modules(&self.#member, &#path, f); }
        });
        modules_mut.push(quote! {
            { #make_path #krate::Module::visit_modules_mut(&mut self.#member, &#path, f); }
        });
        training.push(quote! {
            #krate::Module::set_training(&self.#member, training);
        });
    }
    let ident = &input.ident;
    let (impl_g, ty_g, _) = input.generics.split_for_impl();
    let mut where_c = input
        .generics
        .where_clause
        .clone()
        .unwrap_or(syn::WhereClause {
            where_token: Default::default(),
            predicates: Default::default(),
        });
    where_c.predicates.push(syn::parse_quote!(Self: 'static));
    Ok(quote! {
        impl #impl_g #krate::Module for #ident #ty_g #where_c {
            #[allow(unused_variables)]
            fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &#krate::Tensor)) {
                #(#visit)*
            }
            #[allow(unused_variables)]
            fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut #krate::Tensor)) {
                #(#visit_mut)*
            }
            #[allow(unused_variables)]
            fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &#krate::Buffer)) {
                #(#buffers)*
            }
            fn visit_modules(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn ::core::any::Any)) {
                f(prefix, self);
                #(#modules)*
            }
            fn visit_modules_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn ::core::any::Any)) {
                f(prefix, self);
                #(#modules_mut)*
            }
            #[allow(unused_variables)]
            fn set_training(&self, training: bool) {
                #(#training)*
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::crate_path;

    #[test]
    fn finds_the_crate_from_the_manifest() {
        let umbrella_only = "[package]\nname = \"app\"\n[dependencies]\nfucina = \"0.1\"\n";
        assert_eq!(crate_path(umbrella_only), "::fucina::nn");
        let table = "[dependencies.fucina]\npath = \"..\"\n";
        assert_eq!(crate_path(table), "::fucina::nn");
        let both = "[dependencies]\nfucina.workspace = true\nfucina-nn.workspace = true\n";
        assert_eq!(crate_path(both), "::fucina_nn");
        let nn_itself = "[package]\nname = \"fucina-nn\"\n[dependencies]\nfucina-core.workspace = true\nfucina-nn-derive.workspace = true\n";
        assert_eq!(crate_path(nn_itself), "::fucina_nn");
        assert_eq!(crate_path("# fucina = \"1\"\n"), "::fucina_nn");
        assert_eq!(crate_path(""), "::fucina_nn");
    }
}
