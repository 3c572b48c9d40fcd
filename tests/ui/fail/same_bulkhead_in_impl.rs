// A method calling a method of its own bulkhead (deadlock): call a plain helper, or split them.
use bulkhead::{BulkheadError, bulkhead};

struct ReportService;

impl ReportService {
    #[bulkhead("reports")]
    fn build(&self, id: u32) -> Result<String, BulkheadError> {
        let section = self.load_section(id)?;
        Ok(format!("report {id}: {section}"))
    }

    #[bulkhead("reports")]
    fn load_section(&self, id: u32) -> Result<String, BulkheadError> {
        Ok(format!("section {id}"))
    }
}

fn main() {
    let _ = ReportService.build(1);
}
